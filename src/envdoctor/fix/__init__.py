"""`envdoctor fix`: run the fix steps findings carry, journal everything, re-check, undo.

The one part of envdoctor that writes to the environment it inspects, and
only when asked. By concept: `tools` (who may run a step, aimed at the
target only), `plan` (findings → authorized steps), `lock` (one fix at a
time), `journal` (the manifest and the files kept), `state` (the before-state
of every root a step may write, and putting it back), `execute` (running the
plan), `verify` (the fixed packages' files and imports), `undo` (restoring
the before-state), `render` (text and JSON), `command` (options and exit codes).
Nothing here is imported by `import envdoctor`.
"""
