import sys

from evals.datasets.prepare import main

sys.exit(main())
