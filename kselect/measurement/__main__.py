import sys

from kselect.measurement.runner import main

sys.exit(main())
