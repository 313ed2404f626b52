"""`python -m store ...`: the store tool (see store.cli.store_cli)."""
import sys

from store.cli.store_cli import main

sys.exit(main())
