"""``python -m esjax``: the ``esjax`` command line."""

from esjax._src.cli.main import main

if __name__ == "__main__":
    main()
