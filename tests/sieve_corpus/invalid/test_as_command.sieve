true;
