DROP TABLE certificates;
