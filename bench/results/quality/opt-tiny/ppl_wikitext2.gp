set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/quality/opt-tiny/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.219460433455 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 1274.1710182510662
20 1277.612395749121
30 1278.5563939010635
40 1279.780180268433
e
10 1276.5704337387754
20 1282.7041799828833
30 1290.072005224163
40 1302.6149474827007
e
10 1275.1154286398405
20 1283.9672308547874
30 1291.668058616365
40 1312.9320471613482
e
10 1275.2767472648277
20 1283.211755637233
30 1290.760652219856
40 1309.5825863537184
e
10 1273.6032967559045
20 1277.0343138136607
30 1279.5182993331944
40 1281.1398676349352
e
10 1273.6891973997547
20 1276.8612557361034
30 1279.4908704075842
40 1281.5923402727324
e
10 1275.4710473790353
20 1284.5789904113133
30 1295.9206395075587
40 1311.2145315103116
e
