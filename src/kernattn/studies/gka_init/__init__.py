"""GKA's bandwidth at initialisation (gka-paper gives none): a GKA row of each track trained per
init_sigma and seed (stages.py has the files and the DAG)."""
