"""The Harbor task format (Terminal-Bench 2 and the Harbor registry) as a declared benchmark."""
