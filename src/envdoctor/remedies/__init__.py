"""How a finding is fixed: install commands by owner, the torch wheel to put back.

Not rules: pure helpers the rules call to write the `fix` text and `fix_steps`
for the tool that owns the files (conda, pixi, uv, pip, apt …).
"""
