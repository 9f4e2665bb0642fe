"""Cluster metadata: the records of the metadata log, the image they fold into, and the log's
on-disk helpers.
"""
