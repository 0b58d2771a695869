DROP TABLE intervals;
