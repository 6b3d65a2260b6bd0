"""Shipped training configs: `python -m recipes.train --config <name>`.

Each module defines `get_config() -> TrainConfig` (see `base.py`); its
docstring gives the command, the hardware, the expected accuracy and time.
"""
