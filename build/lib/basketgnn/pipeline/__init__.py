"""One command, one YAML file, the whole job: transaction log -> prepared data -> split ->
DNNTSP and baselines -> evaluation on the same customers -> top-k recommendations, metrics and
a report, each stage cached under the run folder (:mod:`basketgnn.pipeline.run`)."""
