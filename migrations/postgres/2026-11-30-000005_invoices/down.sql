DROP TABLE invoices;
