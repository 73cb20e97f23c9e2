"""``python -m basketgnn ...`` (and ``torchrun ... -m basketgnn ...``): the ``basketgnn`` command."""

from basketgnn.cli import main

if __name__ == "__main__":
    main()
