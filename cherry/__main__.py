import sys

from cherry.cli import main

sys.exit(main())
