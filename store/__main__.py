"""`python -m store ...`: the store tool (see store.tool)."""
import sys

from .tool import main

sys.exit(main())
