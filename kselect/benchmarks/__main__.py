import sys

from kselect.benchmarks.runner import main

sys.exit(main())
