"""The HTML report (`html.py`) and the figures it and `bayesblis check` draw (`figures.py`)."""
