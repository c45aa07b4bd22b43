import sys

from mec_pep.cli import main

sys.exit(main())
