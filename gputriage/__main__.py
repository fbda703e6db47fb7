"""``python -m gputriage``: the same CLI as the ``gputriage`` console script."""

from gputriage.cli import main

if __name__ == "__main__":
    main()
