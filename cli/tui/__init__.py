"""``rlog tui``: a live Textual dashboard of a local rlog cluster."""
