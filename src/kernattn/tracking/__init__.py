"""MLflow tracking, one room: the client every training and the report use (client.py: the
store, experiments, runs, what the DAG's sync recorded), the local server (server.py:
`kernattn mlflow-server`) and the upload of finished runs the store is missing (sync.py:
`kernattn sync-mlflow`). The run folder is the record; MLflow mirrors it."""
