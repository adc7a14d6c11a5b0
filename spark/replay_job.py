"""spark-submit entry point of the load-replay job (same arguments as ``rmqgate spark-replay``).

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] \
        --driver-java-options -Dlog4j2.configurationFile=file:spark/log4j2-quiet.properties \
        spark/replay_job.py CAPTURE.pcap --target 127.0.0.1:9876 --scale 4 --report out.json

spark-submit starts the driver JVM before this file runs, so its log set-up is spark-submit's: the
``--driver-java-options`` above makes it as quiet as ``rmqgate spark-replay`` (which sets it itself);
without it Spark prints its start-up INFO lines, then the job switches to errors only.

The driver imports rmqgate (``--conf spark.pyspark.driver.python=.venv/bin/python``, which wins over
``spark.pyspark.python``, or ``--py-files`` with the zip that ``python -m rmqgate.spark.ship`` builds
in cluster deploy mode); executors get their code from the job itself (spark/ship.py), so their Python
(``spark.pyspark.python``) needs nothing but the driver's minor version. ``--master``
given to spark-submit wins unless the job's own --master is given.
"""

from __future__ import annotations

import sys

try:
    from rmqgate.spark.cli import main
except ImportError as exc:  # pragma: no cover - depends on how spark-submit was started
    sys.exit(
        f"replay_job.py: cannot import rmqgate ({exc}); run spark-submit with "
        "--conf spark.pyspark.driver.python (or PYSPARK_DRIVER_PYTHON without spark.pyspark.python) "
        "pointing at the Python rmqgate is installed in"
    )

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
