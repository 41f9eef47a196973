"""``python -m benchmarks [--quick] [--out DIR] [--only ...]``: the performance harness."""

import sys

from benchmarks.harness import main

sys.exit(main())
