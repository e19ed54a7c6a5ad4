"""The line-wrap counterfactual (gpa-long, Section 3.2): the same GPA runs trained on the corpus
rewrapped and unwrapped; does the first layer's bump follow the line width? (stages.py has the
files and the DAG.)"""
