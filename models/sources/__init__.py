"""Problem sources for the heuristic's data (DESIGN §6): the seeded synthetic sampler lives in
``tiledispatch.native.sampler``; the torchvision crawler lives here."""
