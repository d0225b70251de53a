module dlockd

go 1.19
