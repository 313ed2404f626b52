"""A standalone Spark cluster (one master, one worker) on 127.0.0.1 from the pip pyspark's own
launcher: the package ships `bin/spark-class` and the jars but not `sbin/start-master.sh`, so
the Master and Worker classes are started with spark-class, in the foreground, as our child
processes (their own sessions), and stopped by pid. Needs `java` (17 or later) on PATH."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from typing import Iterator

from tests.support.processes import stop_process
from tests.support.waiting import free_port


def spark_home() -> str:
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


def unavailable() -> str | None:
    """Why a standalone cluster cannot start here (None: it can)."""
    if shutil.which("java") is None:
        return "no java on PATH (the Spark master and worker are JVM processes)"
    try:
        home = spark_home()
    except ImportError:
        return "pyspark is not installed"
    if not os.access(os.path.join(home, "bin", "spark-class"), os.X_OK):
        return f"no bin/spark-class in {home}"
    return None


def _wait_line(path: str, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, encoding="utf-8", errors="replace") as f:
            if text in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    with open(path, encoding="utf-8", errors="replace") as f:
        raise AssertionError(f"no {text!r} from {proc.args[1]} (exit {proc.poll()}):\n{f.read()[-3000:]}")


@contextmanager
def standalone(workdir: str, cores: int = 2, memory: str = "1g",
               timeout: float = 90.0) -> Iterator[str]:
    """Yields the master URL (spark://127.0.0.1:PORT) once the worker has registered."""
    home = spark_home()
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": os.path.join(workdir, "work"), "SPARK_NO_DAEMONIZE": "1"}
    os.makedirs(env["SPARK_WORKER_DIR"], exist_ok=True)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = os.path.join(home, "bin", "spark-class")
    procs: list[subprocess.Popen] = []
    try:
        for name, args, ready in (
                ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                            "--port", str(port), "--webui-port", str(free_port())],
                 "I have been elected leader"),
                ("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--port", str(free_port()), "--webui-port", str(free_port()),
                            "--cores", str(cores), "--memory", memory, url],
                 "Successfully registered with master")):
            log = os.path.join(workdir, f"{name}.log")
            with open(log, "w") as out:
                procs.append(subprocess.Popen([spark_class, *args], stdout=out, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))
            _wait_line(log, ready, procs[-1], timeout)
        yield url
    finally:
        for proc in reversed(procs):
            stop_process(proc, 15)
