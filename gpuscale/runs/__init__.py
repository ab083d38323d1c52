"""gpuscale.runs"""
