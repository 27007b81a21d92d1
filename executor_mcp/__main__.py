import sys

from executor_mcp.cli import main

sys.exit(main())
