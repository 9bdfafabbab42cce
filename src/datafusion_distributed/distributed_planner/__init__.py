"""Turns a DataFusion physical plan into a DAG of stages, each run as one or more tasks."""
