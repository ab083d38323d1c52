"""gpuscale.routes"""
