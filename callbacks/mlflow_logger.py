"""`MLFlowLogger`: metrics, hyperparameters and checkpoints to an MLflow tracking server or store."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Mapping

from callbacks._extras import require_extra
from callbacks._utils import _flat_metrics, _flatten_hparams
from callbacks.logger import Logger
from callbacks.service_timeout import check_timeout_args, http_problem, unreachable
from trainer.contracts import storage
from trainer.contracts.arguments import (
    check_bool, check_path, check_path_component, check_str, hint_misspelled_arguments,
)
from trainer.contracts.user_line import user_stacklevel

if TYPE_CHECKING:
    from trainer.contracts.protocols import ModuleView, TrainerView

_BATCH = 1000  # MLflow's limit of metrics (and 100 of params) per log_batch request
_PARAM_BATCH = 100


class MLFlowLogger(Logger):
    """Logs to MLflow (extra ``mlflow``) from global rank 0 only.

    Args:
        experiment_name: Experiment to log into; created if it does not exist.
        run_name: Name shown for the run (MLflow picks one when ``None``).
        tracking_uri: ``http://host:port`` of a tracking server, a database URI, or a local
            ``file:`` store. ``None``: ``MLFLOW_TRACKING_URI`` or MLflow's default (``./mlruns``).
        tags: Tags set on the run when it is created.
        save_dir: A local ``file:`` store in this directory, used when neither ``tracking_uri``
            nor ``MLFLOW_TRACKING_URI`` is set (as Lightning's ``save_dir``; default: MLflow's
            ``./mlruns``).
        log_model: ``True``: at the end of each ``fit``, the checkpoints every `ModelCheckpoint`
            kept (its top k and ``last``) are uploaded as artifacts under ``checkpoints/``.
        prefix: Put in front of every metric key, joined with ``-`` (``"train-loss"``).
        artifact_location: Where a new experiment stores artifacts (the server's default if None).
        run_id: Log into this existing run instead of creating one.
        synchronous: ``False``: metrics and parameters are sent in the background (MLflow's
            asynchronous logging); ``None`` or ``True``: each call returns once they are stored.
        timeout: Seconds an HTTP tracking server has to answer: once before the first request,
            and then for each of MLflow's requests (``MLFLOW_HTTP_REQUEST_TIMEOUT``, with two
            retries, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, unless those are set already).
        on_unreachable: ``"raise"``: a server that does not answer in time fails the run
            (`ServiceUnreachableError`, naming the URI); ``"warn"``: a
            warning, and the run trains on without this logger. That holds for the first check
            and for any later request that fails (a server that stops answering mid-run): from
            then on metrics and parameters are written to `unsent_path` instead.

    The run is created at the first thing logged. Its id is saved in every checkpoint, so a fit
    resumed from one (``ckpt_path=...``) with a new ``MLFlowLogger()`` appends to the same run;
    metrics are logged at the optimizer step, so the resumed history continues where it stopped.
    Parameters are flattened (``{"opt": {"lr": 0.1}}`` -> ``opt/lr``) and stored as strings.
    """

    @hint_misspelled_arguments
    def __init__(
        self,
        experiment_name: str = "lockstep",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | os.PathLike[str] | None = None,
        log_model: bool = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
        timeout: float = 30.0,
        on_unreachable: str = "raise",
    ) -> None:
        require_extra("mlflow", "MLFlowLogger")
        if not isinstance(experiment_name, str) or not experiment_name:
            raise TypeError(f"MLFlowLogger(experiment_name={experiment_name!r}): expected a non-empty str.")
        if not isinstance(log_model, bool):
            raise TypeError(f"MLFlowLogger(log_model={log_model!r}): expected a bool.")
        check_path("MLFlowLogger(save_dir)", save_dir)
        check_str("MLFlowLogger(prefix)", prefix)
        check_bool("MLFlowLogger(synchronous)", synchronous, allow_none=True)
        check_str("MLFlowLogger(run_name)", run_name, allow_none=True)
        check_str("MLFlowLogger(tracking_uri)", tracking_uri, allow_none=True)
        check_str("MLFlowLogger(artifact_location)", artifact_location, allow_none=True)
        # it names the file of unsent records under the run's root (`unsent_path`)
        check_path_component("MLFlowLogger(run_id)", run_id, allow_none=True)
        if tracking_uri is None and save_dir is not None and not os.environ.get("MLFLOW_TRACKING_URI"):
            tracking_uri = "file:" + os.fspath(save_dir)
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tracking_uri = tracking_uri
        self._prefix = prefix
        self._synchronous = synchronous is not False
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.log_model = log_model
        self.artifact_location = artifact_location
        self.timeout = check_timeout_args("MLFlowLogger", timeout, on_unreachable)
        self.on_unreachable = on_unreachable
        self._checked = False  # whether the server was asked (once, before MLflow's first request)
        self._unreachable = False  # the server did not answer ("warn"): nothing more is sent
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._client: Any = None
        self._rank: int | None = None
        self._root_dir = "."  # the Trainer's default_root_dir, set in `setup`

    @property
    def unsent_path(self) -> str:
        """Where ``on_unreachable="warn"`` writes what could not be sent: JSON lines under the
        Trainer's ``default_root_dir`` (``mlflow_unsent/<run id, or "no-run">.jsonl``)."""
        run = check_path_component("MLFlowLogger's run id (from the tracking server)", self._run_id, allow_none=True)
        return os.path.join(self._root_dir, "mlflow_unsent", f"{run or 'no-run'}.jsonl")

    def _keep_unsent(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        os.makedirs(os.path.dirname(self.unsent_path), exist_ok=True)
        with open(self.unsent_path, "a") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")

    def _send(self, what: str, send: Any, records: Callable[[], list[dict[str, Any]]]) -> None:
        """``send()``; under ``"warn"`` a failure (a timeout, a refused connection, an error answer)
        stops this logger's requests and ``records`` go to `unsent_path` (MLflow's own retries are
        bounded by ``timeout``, so this costs at most a few timeouts once)."""
        if self._unreachable:
            self._keep_unsent(records())
            return
        try:
            send()
        except Exception as err:  # MlflowException wraps requests' timeouts and connection errors
            if self.on_unreachable == "raise":
                raise
            self._unreachable = True
            self._keep_unsent(records())  # built only here: a reachable server costs no copies

            warnings.warn(
                f"MLFlowLogger: the tracking server {self.tracking_uri} failed to take the {what} "
                f"({type(err).__name__}: {str(err)[:300]}). Training goes on without MLflow; what is not "
                f"sent is written to {self.unsent_path}.",
                stacklevel=user_stacklevel(),
            )

    @property
    def save_dir(self) -> str | None:
        """The directory of a local ``file:`` store, else ``None``."""
        uri = self.tracking_uri or ""
        return uri[len("file:"):] if uri.startswith("file:") else None

    # -- the run ----------------------------------------------------------------------------
    @property
    def experiment(self) -> Any:
        """The ``mlflow.MlflowClient`` talking to ``tracking_uri``."""
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    def _check_server(self) -> None:
        """One bounded request to an HTTP tracking server before MLflow's own (which retry for minutes)."""
        import mlflow

        self._checked = True
        uri = self.tracking_uri or mlflow.get_tracking_uri()
        if not uri.startswith(("http://", "https://")):
            return  # a local store or a database: no server to wait for
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, math.ceil(self.timeout))))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        problem = http_problem(uri.rstrip("/") + "/health", self.timeout)
        if problem is not None:
            self._unreachable = True
            unreachable("MLFlowLogger", f"the tracking server {uri}", self.timeout, problem, self.on_unreachable,
                        "Training goes on without MLflow logging.")

    @property
    def _sends(self) -> bool:
        """Whether this process logs: global rank 0, while the server answers."""
        if not self.is_global_zero:
            return False
        if not self._checked:
            self._check_server()
        return not self._unreachable

    @property
    def _logs(self) -> bool:
        """Whether this process handles records: global rank 0 (sent, or kept in `unsent_path`)."""
        if not self.is_global_zero:
            return False
        self._sends  # the first check, which may find the server unreachable
        return True

    @property
    def run_id(self) -> str:
        """This run's id (the run is created on first use)."""
        if self._run_id is None:
            client = self.experiment
            found = client.get_experiment_by_name(self.experiment_name)
            if found is None:
                self._experiment_id = client.create_experiment(
                    self.experiment_name, artifact_location=self.artifact_location
                )
            else:
                self._experiment_id = found.experiment_id
            run = client.create_run(self._experiment_id, run_name=self.run_name, tags=self.tags)
            self._run_id = run.info.run_id
        return self._run_id


    # -- Logger API -------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log each metric at ``step`` (a dict of scalars as ``key/sub_key``)."""
        step = 0 if step is None else step  # the Trainer always gives one; a direct call may not
        if not self._logs:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        flat = _flat_metrics(metrics, self._prefix)
        entries = [Metric(key, value, now, int(step)) for key, value in flat.items()]
        for i in range(0, len(entries), _BATCH):
            chunk = entries[i:i + _BATCH]
            self._send("metrics", lambda: self.experiment.log_batch(
                self.run_id, metrics=chunk, synchronous=self._synchronous),
                lambda: [{"metric": m.key, "value": m.value, "step": m.step, "timestamp": m.timestamp} for m in chunk])

    def log_hyperparams(self, params: Any) -> None:
        """Log ``params`` as MLflow parameters (flattened, as strings)."""
        if not self._logs:
            return
        from mlflow.entities import Param

        flat = _flatten_hparams(self._hparams_to_plain(params))
        entries = [Param(key, str(value)) for key, value in flat.items()]
        for i in range(0, len(entries), _PARAM_BATCH):
            chunk = entries[i:i + _PARAM_BATCH]
            self._send("parameters", lambda: self.experiment.log_batch(
                self.run_id, params=chunk, synchronous=self._synchronous),
                lambda: [{"param": p.key, "value": p.value} for p in chunk])

    def log_text(self, tag: str, text: str) -> None:
        """Store ``text`` as the artifact ``<tag>.txt``."""
        if not self._logs:
            return
        name = f"{tag.replace(os.sep, '_')}.txt"
        self._send("text", lambda: self.experiment.log_text(self.run_id, text, name), lambda: [{"artifact": name, "text": text}])

    def finalize(self, status: str) -> None:
        """Mark the run ``FINISHED`` or ``FAILED`` (a later call of the Trainer reopens it)."""
        if not self.is_global_zero or self._run_id is None or self._unreachable:
            return
        if not self._synchronous:
            import mlflow

            mlflow.flush_async_logging()  # the run is marked ended once its records are stored
        self.experiment.set_terminated(self._run_id, "FINISHED" if status == "success" else "FAILED")

    # -- resume -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run's id, so a resumed fit logs into the same run."""
        return {"run_id": self._run_id, "experiment_name": self.experiment_name}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Adopt the checkpoint's run, unless this logger already has one (``run_id=`` or logged)."""
        if self._run_id is None and state_dict.get("experiment_name") == self.experiment_name:
            # a checkpoint is a file anyone may write: its run id names the unsent file (`unsent_path`)
            self._run_id = check_path_component(
                "MLFlowLogger: the checkpoint's state entry 'run_id'", state_dict.get("run_id"), allow_none=True
            )

    def __getstate__(self) -> dict[str, Any]:
        # the client holds a connection pool: each spawned worker makes its own
        return {**self.__dict__, "_client": None}

    # -- hooks ------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, pl_module: ModuleView, stage: str) -> None:
        self._rank = trainer.global_rank
        self._root_dir = trainer.default_root_dir

    def on_fit_end(self, trainer: TrainerView, pl_module: ModuleView) -> None:
        if not self.log_model or not trainer.is_global_zero or not self._sends:
            return
        for cb in trainer.checkpoint_callbacks:
            paths = [*getattr(cb, "best_k_models", {}), getattr(cb, "last_model_path", "")]
            for path in dict.fromkeys(p for p in paths if p and storage.isfile(p)):
                self._log_file(path)

    def _log_file(self, path: str) -> None:
        if not storage.is_url(path):
            self.experiment.log_artifact(self.run_id, path, "checkpoints")
            return
        with tempfile.TemporaryDirectory() as tmp:  # MLflow uploads local files only
            local = os.path.join(tmp, path.rstrip("/").rsplit("/", 1)[-1])
            with open(local, "wb") as f:
                f.write(storage.read_bytes(path))
            self.experiment.log_artifact(self.run_id, local, "checkpoints")
