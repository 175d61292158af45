"""Tools for the workbook's authors: the Chinese notebook twins, and stepdiff."""
