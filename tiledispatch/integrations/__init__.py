"""Framework integrations. Each lives in its own module and is imported only by the user who wants
it (``tiledispatch.integrations.torch`` needs the ``torch`` extra); importing this package imports
nothing else, so the thin client stays framework-free."""
