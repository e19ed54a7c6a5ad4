"""Removing a weak head, then fine-tuning (gpa-long, Sections 3.1 and 4): each trained GPA run
with its weakest banks' heads removed, beside a no-removal and a random-head control (stages.py
has the files and the DAG)."""
