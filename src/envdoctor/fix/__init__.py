"""`envdoctor fix`: run the fix steps findings carry, journal everything, re-check, undo.

The one part of envdoctor that writes to the environment it inspects, and
only when asked. By concept: `tools` (who may run a step, aimed at the
target only), `plan` (findings → authorized steps), `journal` (the manifest
and the files kept), `snapshot` (what a package step may change, before and
after), `execute` (running the plan and the re-check), `undo` (putting it
back), `render` (text and JSON), `command` (options and exit codes).
Nothing here is imported by `import envdoctor`.
"""
