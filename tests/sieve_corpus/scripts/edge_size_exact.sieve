require "fileinto";
if size :over 492 { fileinto "Over492"; }
if size :under 492 { fileinto "Under492"; }
if size :over 491 { fileinto "Over491"; }
