"""``python -m basketgnn``: the command line, also as a module for launchers such as torchrun
(``torchrun --standalone --nproc-per-node 2 -m basketgnn train ...``)."""

from basketgnn.cli import main

if __name__ == "__main__":
    main()
