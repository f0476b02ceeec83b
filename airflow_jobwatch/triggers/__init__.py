"""triggers"""
