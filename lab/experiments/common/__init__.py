"""What several experiments share: measuring a set of step methods and the sweeps' machinery."""
