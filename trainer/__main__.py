"""``python -m trainer fit|validate|test|predict --config run.yaml``: see `trainer.cli`."""
from trainer.cli import main

if __name__ == "__main__":
    main()
