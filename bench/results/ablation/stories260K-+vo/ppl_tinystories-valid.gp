set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+vo/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.305829676264294
20 9.70935792579167
30 18.948372485131852
40 33.81104275845986
e
