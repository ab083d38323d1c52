"""gpuscale.records"""
