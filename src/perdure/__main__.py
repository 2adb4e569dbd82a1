"""``python -m perdure`` runs the command line."""

from __future__ import annotations

from perdure.cli.main import main

if __name__ == "__main__":
    main()
