"""The host wing: facts about the machine (hardware, driver, compilers, scheduler) and what it can build."""
