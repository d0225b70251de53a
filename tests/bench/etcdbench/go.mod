module dlockd-etcdbench

go 1.19
