"""The code MLflow runs to build a ragexp serving model (models-from-code: ``promote`` logs this
file as the pyfunc ``python_model``, and loading the model executes it)."""

from mlflow.models import set_model

from ragexp.serving.model import RagexpModel

set_model(RagexpModel())
