require "reject";
if address :domain "from" "shop.example.org" { reject "No ads, please."; }
