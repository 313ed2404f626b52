"""`python -m store ...`: the store tool (see store.cli.main)."""
import sys

from .cli.main import main

sys.exit(main())
