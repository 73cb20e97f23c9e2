"""``python -m basketgnn.cli``: the command line, as ``python -m basketgnn``."""

from basketgnn.cli import main

if __name__ == "__main__":
    main()
