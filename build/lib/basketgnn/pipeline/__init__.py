"""One command, one YAML file, the whole job: transaction log -> prepared data -> split ->
DNNTSP and baselines -> evaluation on the same customers -> top-k recommendations, metrics and
a report, each stage cached under the run folder.

- ``schema``: the YAML file's sections and :func:`~basketgnn.pipeline.schema.load_job`, which
  checks it into a ``Job``;
- ``cache``: stage keys, the stage folders and their ``_done.json``, the run folder's lock,
  publishing the outputs as one set;
- ``history``: ``pipeline.log`` and ``runs.jsonl``, the previous checkpoint a warm start
  reads, pruning of stage folders (``keep_runs``);
- ``run``: :func:`~basketgnn.pipeline.run.run_pipeline`, the stages in order;
- ``report``: ``metrics.json``'s content, ``report.html`` and its charts.
"""
