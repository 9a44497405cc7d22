"""Evaluation datasets: the generic format (:mod:`evals.datasets.format`) and builders."""
