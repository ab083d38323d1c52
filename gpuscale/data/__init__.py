"""gpuscale.data"""
