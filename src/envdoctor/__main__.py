"""`python -m envdoctor` is the same as the `envdoctor` command."""
from envdoctor.cli import main

raise SystemExit(main())
