# PyTorch backend tests (filled below)
