module mts.invalid/suite

go 1.22
