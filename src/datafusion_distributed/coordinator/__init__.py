"""DistributedContext, DistributedDataFrame, the stage-DAG scheduler and the head stage."""
