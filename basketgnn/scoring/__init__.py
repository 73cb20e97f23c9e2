"""Scores below the recommenders: TIFU machinery and score fusion, usable by any model."""
